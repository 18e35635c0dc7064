"""Training corpora of the learned placers: Placeto's graph families and GDP's
pretraining corpus, generated from code."""
