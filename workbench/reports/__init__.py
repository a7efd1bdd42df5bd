"""The shared building blocks of the reports; each stage's own section lives in its package
(``workbench/stages/<stage>/report.py``, named by its spec's ``report``) and each benchmark's report in
``workbench/bench/<name>/report.py``.

What is here: the contract between a stage's section and the ``report`` stage that places it (:mod:`.section`), the
run's findings that open the report and end the run (:mod:`.findings`), the time table (:mod:`.timing`), the
collected features' AUROC intervals (:mod:`.auroc`: the ``collect`` section and the findings), the answering modes'
titles (:mod:`.modes`: the ``answer`` and ``tune_reader`` sections) and the NLI judges' table (:mod:`.nli`: the
``report_nli`` stage and the backends benchmark). A module here reads stage outputs as files and dicts and never
imports a stage, so it sits below them (layer 5 of docs/architecture.md).
"""
