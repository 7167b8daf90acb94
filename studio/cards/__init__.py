"""The cards: a fixed, versioned suite measured on this machine, written as a card that compares
with the cards of other machines.

- `studio.cards.suite`: the suite (`SUITE_VERSION`), the models it measures on each device and the
  configurations it tries;
- `studio.cards.options`: the options of a card run, checked before anything runs;
- `studio.cards.machine`: this machine as a card names it, and its fingerprint;
- `studio.cards.picks`: which measured configurations keep the math and which change the image, and the
  best of each;
- `studio.cards.run_suite`: `run_cards`, the suite measured through Compare and the auto-tuner;
- `studio.cards.card`: the card (`SCHEMA`) and its Markdown summary, written all at once (`save`);
- `studio.cards.sheet`: the contact sheet, each model's baseline and winners side by side;
- `studio.cards.collection`: cards read back (older schemas migrated), one table per model across machines;
- `studio.cards.measured_first_calls`: what a configuration's first call costs, said before it runs (the
  run log, else the cards);
- `studio.cards.regression`: did an upgrade make it slower, two cards of one machine compared row by row;
- `studio.cards.hub`: cards loaded from and published to a Hugging Face dataset repository;
- `studio.cards.doc_table`: docs/benchmarks.md's "What is fastest where" table, rendered from docs/cards.

Nothing here imports torch at import time but `run_suite` (and what it imports): reading cards needs no model.
"""
