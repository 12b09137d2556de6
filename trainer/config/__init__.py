"""What a run is configured by: the parameter table (params), the training configuration (training), the
source grammar of models and datasets (sources)."""
