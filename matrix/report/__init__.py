"""The compatibility report: JUnit from any runners read safely, judged against the rules, rendered.

``reading`` reads the files (losing nothing), ``status`` judges each case and cell,
``model`` builds the report (evidence, diffs, changes across releases), and each
``render_*`` module owns one output format. Nothing here imports torch or vLLM.
"""
