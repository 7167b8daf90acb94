"""The app's tabs, one module per tab or pair of tabs: `generate`, `compare` (Compare and Ladder),
`autotune`, `history`, `shard` and `system`. Each builds its components inside the
`gr.Tab` the caller opened and wires them to the handlers by name."""
