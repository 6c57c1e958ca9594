"""``python -m kernelpack``: the command line (:mod:`.main`) and one module per report command
(:mod:`.info`, :mod:`.inspection`, :mod:`.doctor`, :mod:`.coverage` for ``targets``)."""
