"""What can be loaded: the pipeline registry, the loader, schedulers, and the bundled model's code."""
