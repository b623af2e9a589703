"""The stored study: one home for what EAS keeps in an Optuna study and how it is opened.

- schema.py   attribute names, the search settings, the schema version
- storage.py  storage URLs, the checks made before anything is written, opening for a search
- reader.py   read-only SQL on Optuna's tables (never writes), incremental for live views
- records.py  stored trials -> validated records (a broken trial is flagged, never fatal)
- setup.py    creating a study, or resuming one made with the same settings
"""
