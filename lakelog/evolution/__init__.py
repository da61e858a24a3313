"""Schema evolution and the table's rules: add, drop, widen and rename columns
(``schema.py``, ``rename.py``), and CHECK / NOT NULL constraints added and dropped on an
existing table (``constraints.py``). Each is one ``metadata`` commit; data files are never
rewritten."""
