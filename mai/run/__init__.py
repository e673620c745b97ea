"""The run's steps over the store, without Prefect (the layer between storage and the Prefect tasks): what the
pipeline (mai/pipeline.py) runs in the command's process when nothing is missing, and what the flows' tasks call."""
