"""Stage 4, edit: scale or prune a selection in place with an exact undo
(:mod:`~mathneuro.edit.intervention`), and write the edited model as a plain folder
(:mod:`~mathneuro.edit.export`)."""
