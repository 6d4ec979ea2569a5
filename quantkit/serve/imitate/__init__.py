"""A folder for the PYTHONPATH of a vLLM server that imitates a lesser CPU (serve/env.py): its
`sitecustomize.py` runs in each of that server's Python processes; nothing imports it from quantkit."""
