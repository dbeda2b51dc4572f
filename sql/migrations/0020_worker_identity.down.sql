alter table pgrun.workers drop column login_role;
