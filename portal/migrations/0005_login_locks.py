import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0004_heartbeat'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='LoginLock',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('username', models.CharField(db_index=True, max_length=150, verbose_name='username')),
                ('failures', models.PositiveIntegerField(verbose_name='failed logins')),
                ('locked_at', models.DateTimeField(default=django.utils.timezone.now, verbose_name='locked at')),
                ('until', models.DateTimeField(verbose_name='locked until')),
                ('lifted_at', models.DateTimeField(blank=True, null=True, verbose_name='lifted at')),
                ('lifted_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='lifted by')),
            ],
            options={
                'verbose_name': 'login lock',
                'verbose_name_plural': 'login locks',
                'ordering': ['-locked_at', '-id'],
            },
        ),
    ]
