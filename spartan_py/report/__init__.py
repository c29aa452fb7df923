"""The report generator (``spartan report DIR``)."""

from spartan_py.report.page import write_report

__all__ = ["write_report"]
