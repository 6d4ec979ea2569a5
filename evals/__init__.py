"""Data package: evals/ at the top of the repository, shipped as quantkit.eval_tasks (the task
registry tasks.yaml and quantkit's own task templates). It holds no code."""
