"""The backup file format (file.py) and seeding a new cluster's data directories from it (seed.py);
the HTTP route is node/api/backup.py.
"""
