-- Reverses 0001_core: drops the whole engine, functions included.
drop schema if exists pgrun cascade;
