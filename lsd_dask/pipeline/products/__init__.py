"""What people read of a run: the label files and their sidecars (:mod:`.label_files`),
``report.json`` (:mod:`.report_json`), ``report.html`` (:mod:`.report_html`) and the
citations (:mod:`.citations`). Products read the stages' results; no stage reads them."""
