"""The kit's tools: scripts run as files (``python3 tools/readme.py``) and the modules noxfile.py imports.

A regular package, not a namespace one: noxfile.py puts the kit's root first on ``sys.path``, and a regular
package there is found before any other ``tools`` an environment may hold; a namespace package would lose to one.
"""
