"""Hyper-parameter search: an Optuna study driven through Hydra (`hparams_search=`, the
alpha_rl_optuna sweeper; alpha_rl.search.study) and its confirmation on unseen seeds and folds
(`alpha-rl-confirm`; alpha_rl.search.confirm)."""
