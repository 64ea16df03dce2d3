"""Sources: where samples come from (exporter text, TSDB APIs, recordings), as SeriesBlocks."""
