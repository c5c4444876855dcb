"""liqo-stack policy pack (see __main__.py); a package so that the type checker covers it."""
