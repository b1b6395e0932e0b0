"""Continual learning (the Mammoth world): the ``continual`` task — a sequence of tasks
trained one after another with an algorithm, evaluated as class-IL and task-IL accuracy
matrices."""
