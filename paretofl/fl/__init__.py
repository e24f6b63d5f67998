"""The trainer: vectorised DP federated learning in PyTorch (CPU or CUDA).

torch lives here and only here; nothing in paretofl.theory or paretofl.design
imports this package.
"""
