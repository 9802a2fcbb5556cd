"""The first paper's backend study (Section 5.4): no model, so nothing to judge; Figures 2 and 7, H3."""

from harness.studies import Study, register

register(Study("backends", run="bench.backends.study:run_study", judge=None, analysis="analysis.run:main",
               record="record", locked=True,
               about="index backends under views (Section 5.4)"))
