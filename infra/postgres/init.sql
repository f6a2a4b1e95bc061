-- One database per owner of state; each service creates its own tables on start.
CREATE DATABASE switchyard_gateway;
CREATE DATABASE switchyard_context;
CREATE DATABASE switchyard_logger;
