"""What a run and a sweep say: the summary's lines, the curves, the progress line and a sweep's
last lines (the bottom room of the pipeline: it imports no other)."""
