"""zhlm's recipes, one ``get_config(arg)`` file each: ``--config=bert:tiny`` (a name, from any
directory) or ``--config=configs/bert.py:tiny`` (a path). Installed as ``zhlm.configs`` and
loaded by file (``zhlm.config_files``), never imported as modules."""
