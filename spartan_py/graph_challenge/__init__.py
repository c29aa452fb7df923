"""The Sparse DNN Graph Challenge workload: formats, networks, inputs, generators."""

from spartan_py.graph_challenge.formats import read_matrix_market, read_triples, read_triples_matrix, read_truth
from spartan_py.graph_challenge.generate import generate_inputs, generate_network
from spartan_py.graph_challenge.network import (
    OFFICIAL_BIAS,
    OFFICIAL_CLAMP,
    Network,
    load_inputs,
    load_network,
    official_bias,
    write_network,
)
from spartan_py.graph_challenge.writers import write_triples, write_truth

__all__ = [
    "OFFICIAL_BIAS",
    "OFFICIAL_CLAMP",
    "Network",
    "generate_inputs",
    "generate_network",
    "load_inputs",
    "load_network",
    "official_bias",
    "read_matrix_market",
    "read_triples",
    "read_triples_matrix",
    "read_truth",
    "write_network",
    "write_triples",
    "write_truth",
]
