"""Co-search studies: YAML study files (:mod:`~dse.study.spec`, :mod:`~dse.study.loader`), the
search space (:mod:`~dse.study.space`), evaluation (:mod:`~dse.study.evaluate`), the Optuna
driver and workers (:mod:`~dse.study.driver`, :mod:`~dse.study.workers`) and the outputs.
Quality proxies live in :mod:`dse.quality`. Importing this package imports nothing heavy.

>>> from dse.study.loader import load_study
>>> from dse.study.driver import run_study
>>> summary = run_study(load_study("studies/codesign_gpt2_npu.yaml"), trials=20)
"""
