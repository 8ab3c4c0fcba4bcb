"""Scaling sweeps: how statekeeper's put/get cost, restart time, RSS and disk grow with
store size, value size and kept history (`python -m statekeeper.benchmarks.scaling --help`).

- points.py: the pure parts (sweep points, Point/Stat, bend detection, Markdown table);
- measure.py: the loader and the measurements of one point against a running cluster;
- sweeps.py: the three sweeps, each on its own fresh cluster;
- plot.py: one PNG per sweep; __main__.py: the command line and the results section.
"""
