"""The configuration: how an option is declared on a config field (options.py), the launch settings
every benchmark nests (launch.py), a sweep's RunConfig (sweep.py) and sweep files (sweepfile.py), each
validated before any process group starts."""
