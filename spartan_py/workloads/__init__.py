"""Workloads: what an experiment runs, one package per kind (``graph_challenge``, ``conv``)."""
