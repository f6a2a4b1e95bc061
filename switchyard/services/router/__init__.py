"""Router: picks model, mode, pool and a sticky inference replica for each request."""
