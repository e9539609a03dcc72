"""Stage 4, edit: what is done to a selection, undoably. The registered interventions (prune, scale,
noise, mean_ablate, finetune, yours) are in :mod:`~mathneuro.edit.interventions`; the undo handle
they all return and the scalar edit in :mod:`~mathneuro.edit.undoable`; writing the edited
model as a plain folder in :mod:`~mathneuro.edit.export`."""
