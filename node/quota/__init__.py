"""The storage quota and its NOSPACE alarm: the decision (alarm.py), the write gate (gate.py), the
node's disk use (disk_watch.py) and the other nodes' alarms (peers.py).
"""
