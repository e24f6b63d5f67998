"""The analytic core of paretofl: pure numpy/scipy, never imports torch.

Section numbers (§) refer to ``shared/design/theory.md``.
"""
