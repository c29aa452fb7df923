"""The ``graph_challenge`` workload: Sparse DNN Graph Challenge inference on the engines.

Its runner-facing parts live here (the section model, the point runner, the tables, the
report); the data it reads (file formats, the generator, ``Network``) is
:mod:`spartan_py.graph_challenge`, the layer the engines import."""
