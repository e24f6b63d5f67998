"""The analytic core of paretofl: numpy and scipy only, never torch.

Section numbers (§) refer to docs/theory.md, the project's account of the
mathematics, which cites the papers.
"""
