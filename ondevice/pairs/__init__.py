"""Pair models: cross-encoder teachers distilled into siamese BiLSTM students (DSE), scored on device.

Modules, one job each: `data` (tasks and seeded splits), `crossencoder` (teacher fine-tuning), `logits`
(content-keyed logit cache), `config` (the pair-data piece of every run config), `augment` (random and
Hamming-neighbour pairs; its `AugmentConfig` is every run config's augmentation piece), `model` (head and loss), `train`
(DSE students, alpha on dev), `single` (paper-004 single-sentence MLP head), `metrics`, `export` (pair head in a
bundle) and `runtime` (torch-free scoring and reranking); DiPair: `dipair` (token states and transformer head),
`dipair_train` (two-stage training), `dipair_export` (encoder token-state outputs, head graph) and
`dipair_runtime`. Nothing heavy is imported here.
"""
