"""The experiment runner: YAML experiments, sweeps, resumable runs (``spartan run``)."""

from spartan_py.runner.execute import RunSummary, run_experiment
from spartan_py.runner.schema import Experiment, Sweep
from spartan_py.runner.sweep import Point, load_experiment
from spartan_py.workloads.graph_challenge.schema import GraphChallengeWorkload

__all__ = ["Experiment", "GraphChallengeWorkload", "Point", "RunSummary", "Sweep", "load_experiment", "run_experiment"]
