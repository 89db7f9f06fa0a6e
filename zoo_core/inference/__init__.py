"""Running a loaded variant: the model wrapper, sampling and its settings,
prompts, and the threads it runs on."""
