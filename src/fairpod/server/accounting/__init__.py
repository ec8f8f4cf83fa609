"""What was used and what it was worth: usage samples and their history (``usage``, ``usage_math``, ``rollups``),
per-team figures (``figures``), goodput (``goodput``), estimated starts (``eta``), the job totals of ``/metrics``
(``job_tallies``)."""
