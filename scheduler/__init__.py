"""The beat election, the schedule tables and the slot grid; it imports no app.

Entries name tasks by the stable names in ``celery_conf/names.py``; the apps that run them
import from here (the grid, the missed-slot policy), never the other way round.
"""
