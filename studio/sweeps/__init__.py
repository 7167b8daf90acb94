"""Sweeps: Compare, Ladder and Auto-tune, all measured by one interleaved runner (`runner.run_sweep`)."""
