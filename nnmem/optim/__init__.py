"""The optimizers' parts, one job per module: the hyperparameter schedules (schedules.py), the
Optimizer base with its two-phase step and its state (optimizer.py), and SINGA's four update
rules (update_rules.py). The package imports none of them: SINGA's ``opt`` module
(nnmem/opt.py) names what a user sees."""
