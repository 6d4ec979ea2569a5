"""Token-level fidelity of a quantized variant to its baseline, on the same token sequences.

- `estimators.py`: per position, from each model's top-k log-probabilities and the actual next
  token's: KL(baseline || variant) bounds and estimate, top-1 agreement, the actual token's NLL.
- `intervals.py`: a document's sums, and the corpus figures with paired bootstrap intervals over
  documents.
- `documents.py`: offline texts (QUANTKIT_DATA_DIR) as fixed-length windows of token ids.
- `client.py`: prompt log-probabilities of those windows from a served vLLM model.
"""
