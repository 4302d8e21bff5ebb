"""The α-β fit's Python API under the name docs/python-api.md gave it before the packages:
``commbench.fit.fit_frame`` (the fit itself lives in commbench.results.fit)."""

from commbench.results.fit import SeriesFit, fit_frame, fit_rows

__all__ = ["SeriesFit", "fit_frame", "fit_rows"]
