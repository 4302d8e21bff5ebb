"""The commands on saved runs: compare (the regression gate), plot and report. They read files through
commbench.results and never touch a backend or import torch."""
