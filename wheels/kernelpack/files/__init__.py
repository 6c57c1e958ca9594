"""The files kernelpack reads and writes on a user's machine: where they live (:mod:`.paths`), how
an untrusted file is read (:mod:`.regular`), how a file or folder is replaced atomically
(:mod:`.atomic`), how what is read is checked against its sha256 (:mod:`.digest`). Leaves: they
import nothing of kernelpack but its errors."""
