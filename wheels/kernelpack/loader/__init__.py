"""From a module name to a loaded module: what is installed (:mod:`.catalog`), the image files
(:mod:`.images`), the disk cache (:mod:`.cache`, :mod:`.cache_files`), the advice when nothing fits
(:mod:`.hints`), :func:`kernelpack.load` itself (:mod:`.load`) and the :class:`kernelpack.Module` and
:class:`kernelpack.Kernel` it gives (:mod:`.module`)."""
