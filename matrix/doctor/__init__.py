"""``python -m matrix doctor``: the published matrix's answer for this machine, or for a set-up described by flags.

Standard library only, like ``env`` and ``plan``: a person asks it with the system Python in a
fresh clone, before anything is installed. ``published`` reads compat.json, ``answer`` decides
the set-up and finds its cell and release, ``render`` owns every word it prints.
"""
