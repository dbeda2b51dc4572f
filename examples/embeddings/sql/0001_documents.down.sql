drop schema if exists pgrun_examples cascade;
