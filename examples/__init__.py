"""paretofl examples (a package, so that "examples.your_model:mlp" resolves from the repository root)."""
