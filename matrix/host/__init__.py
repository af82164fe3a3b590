"""This machine: facts collected from it (``facts``) and what the matrix decides from them (``classify``)."""
