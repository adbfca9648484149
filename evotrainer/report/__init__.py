"""The report wing: reading a run back, for people.

    collect.py  what RUN_DIR/report.html shows, gathered from what the run left on disk, and writing it
    charts.py   the report's charts (matplotlib, inline SVG)
    html.py     the page (template.html is its frame and styles)
    history.py  the run's phases and harness lineage as records (``evotrainer log``, ``show``, ``status``)
"""
