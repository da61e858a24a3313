"""Other engines and other tools' files: the Delta-compatible view (:mod:`.delta`),
DuckDB/polars/pandas readers (:mod:`.engines`), and adopting Parquet written elsewhere
(:mod:`.convert`, :mod:`.footers`)."""
