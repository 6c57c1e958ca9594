"""The products: op libraries built on the platform (formats, targets, devices, backends, loader).

One folder per product (:mod:`kernelpack.ops.mlp`); imports go one way, from a product to the
platform, never back (tests/test_import_graph.py checks it). Each product's public names are
re-exported by a small module at the top of the package (``kernelpack.mlp``, ``kernelpack.nn``).
"""
