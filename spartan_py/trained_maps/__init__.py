"""Real activation maps from networks trained on Fashion-MNIST (``spartan maps``).

:mod:`.fashion` reads the IDX files (NumPy only); :mod:`.models`, :mod:`.capture`,
:mod:`.train` and :mod:`.job` need PyTorch and torchvision (the ``torch`` extra), imported
only inside them; :mod:`.figures` draws the bound curves from a job's JSON summary.
"""
